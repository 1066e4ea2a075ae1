-- expect: UnsafeQuery
-- match: table functions
SELECT COUNT(*) FROM read_csv('/etc/passwd')
