-- expect: SQLError
-- match: unknown table
-- options: {"epsilon": 1}
SELECT COUNT(*) FROM "students; DROP TABLE students"
