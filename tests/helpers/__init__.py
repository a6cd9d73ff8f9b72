"""Helpers the tests import: scripted-model files, a dev server, recorded histories.

Fixtures live in ``conftest.py`` files; everything a test imports by name lives here.
"""
