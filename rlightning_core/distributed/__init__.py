"""Ray: cluster start-up, actor placement, the remote env group and the Ray execution of engines."""
