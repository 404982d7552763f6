"""The one training loop for every policy (dataset windows, optimisation, checkpoints, resume) and evaluation."""
