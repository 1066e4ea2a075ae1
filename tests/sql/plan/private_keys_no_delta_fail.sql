-- expect: UnsafeQuery
-- match: partition selection
-- options: {"epsilon": 1}
SELECT department, COUNT(*) FROM students GROUP BY department
