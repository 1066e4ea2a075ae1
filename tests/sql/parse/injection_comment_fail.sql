-- expect: SQLError
SELECT COUNT(*) FROM students WHERE editor = 'x'; DELETE FROM students; --'
