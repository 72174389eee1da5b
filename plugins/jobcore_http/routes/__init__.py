"""The hub's routes, one module per kind of client (DESIGN §11)."""
