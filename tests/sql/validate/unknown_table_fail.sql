-- expect: SQLError
-- match: unknown table 'teachers'
SELECT COUNT(*) FROM teachers
