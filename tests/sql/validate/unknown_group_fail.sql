-- expect: SQLError
-- match: unknown column
SELECT COUNT(*) FROM students GROUP BY nope
