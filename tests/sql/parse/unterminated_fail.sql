-- expect: SQLError
SELECT COUNT(*) FROM students WHERE editor = 'vim
