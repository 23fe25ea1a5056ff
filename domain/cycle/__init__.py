"""The scheduling cycle: framework protocols, the statement, fitting, victim search, ordering, the session (pure)."""
