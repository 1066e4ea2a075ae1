-- expect: SQLError
-- match: type-check
-- options: {"epsilon": 1}
SELECT COUNT(*) FROM students WHERE editor > 5
