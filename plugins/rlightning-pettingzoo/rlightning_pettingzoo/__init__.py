"""PettingZoo parallel envs for rlightning, with parameter sharing across agents of the same spaces."""
