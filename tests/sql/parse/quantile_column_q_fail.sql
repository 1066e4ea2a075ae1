-- expect: UnsafeQuery
SELECT QUANTILE(scholarship, birth_year) FROM students
