"""Local fakes of external services, spoken to by the real client libraries in tests."""
