-- a comment
SELECT /* inline */ COUNT(*) FROM students
