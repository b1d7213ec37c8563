"""Replay stage: a pytest plugin that turns every dumped API call into a scored test case."""
