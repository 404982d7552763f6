"""The online algorithms, one module each, registered by name (registry.py): HG-DAgger, residual RL, RLPD, DSRL."""
