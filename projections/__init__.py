"""Projections: views folded from the journal, explain, what-if, and the process that serves them."""
