-- expect: SQLError
-- match: unknown column
-- options: {"epsilon": 1}
SELECT COUNT(*) FROM students WHERE "editor""; DROP TABLE students; --" = 'x'
