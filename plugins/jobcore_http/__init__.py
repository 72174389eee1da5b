"""Placeholder until the hub branch lands (its __init__ wins at merge)."""
