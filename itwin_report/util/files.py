"""Facts about files the tool meets, known in one place."""

SQLITE_MAGIC = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database
