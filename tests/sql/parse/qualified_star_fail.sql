-- expect: UnsafeQuery
SELECT students.* FROM students
