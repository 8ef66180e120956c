"""Shared test helpers: brute-force enumeration, references and tiny pipelines."""
