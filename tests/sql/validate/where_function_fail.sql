-- expect: UnsafeQuery
-- match: not allowed
SELECT COUNT(*) FROM students WHERE read_text('/etc/passwd') = 'x'
