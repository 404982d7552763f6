"""Learners for online fine-tuning with human interventions (buffers, HG-DAgger, SAC/RLPD, credit, transport)."""
