"""The test suite; its shared helpers are modules here (``tests.streams``, ``tests.reference``)."""
