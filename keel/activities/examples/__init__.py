"""Example tools and a scripted demo conversation that need no credentials."""
