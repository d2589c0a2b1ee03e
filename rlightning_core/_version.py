"""Version numbers: the distribution's, and the plugin API's that plugins declare compatibility with."""

__version__ = "0.1.0"

#: Version of the plugin contract (hook specs, ``register`` signature, base classes). A plugin declares the
#: range it was written for with a module attribute ``RLIGHTNING_PLUGIN_API = ">=2,<3"``; the major number
#: changes only when a hook loses or changes an argument.
PLUGIN_API_VERSION = "2.0"
