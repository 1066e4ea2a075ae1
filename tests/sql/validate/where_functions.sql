SELECT COUNT(*) FROM students WHERE lower(editor) LIKE 'v%' AND abs(scholarship - 3000) < 1000
  AND year(birth_date) BETWEEN 1992 AND 1995 AND department IN ('Computing', 'Physics')
  AND scholarship IS NOT NULL AND NOT gender = 'male'
