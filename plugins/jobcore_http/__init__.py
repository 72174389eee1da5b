"""jobcore plugin `http`: `jobcore serve`, the hub API, live events and the dashboard."""
