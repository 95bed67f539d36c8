"""The fast tier (`make test-fast`): pure logic, and the handlers in-process on the Firestore emulator."""
