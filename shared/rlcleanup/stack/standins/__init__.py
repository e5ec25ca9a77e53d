"""Stand-ins for controllers that have no emulator: small HTTP servers speaking exactly their upstream wire
shapes, started by the test suite on free ports in their own process groups (`python -m ...`), each reading its
jobs from a JSON file on every request so a test changes the controller's state by rewriting that file."""
