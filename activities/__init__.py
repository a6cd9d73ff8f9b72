"""Keel activities: model calls and tool runs."""
