"""Preemption rules: one module per kind, registered in domain.plugins (pure)."""
