-- expect: SQLError
-- match: ORDER BY
SELECT COUNT(*) AS n FROM students ORDER BY nope
