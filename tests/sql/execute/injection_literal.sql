-- options: {"epsilon": 1}
-- The quote is data inside a literal, re-rendered escaped by sqlglot.
SELECT COUNT(*) AS n FROM students WHERE editor = 'x'' OR 1=1; DROP TABLE students; --'
