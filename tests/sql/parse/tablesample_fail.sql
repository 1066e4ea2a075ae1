-- expect: UnsafeQuery
SELECT COUNT(*) FROM students TABLESAMPLE 10%
