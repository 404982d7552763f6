"""Simulation: MuJoCo scenes composed from robot models that PyPI packages ship."""
