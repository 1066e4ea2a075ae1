-- expect: SQLError
-- match: unknown column 'salary'.*line 3, column 12
SELECT SUM(salary) FROM students
