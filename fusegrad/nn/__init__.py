"""Neural-network helpers: optimizers (fusegrad.nn.optim) and saving/loading state (fusegrad.nn.state)."""
from fusegrad.nn import optim, state

__all__ = ["optim", "state"]
