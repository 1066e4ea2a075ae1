SELECT s.editor, COUNT(*) FROM students AS s WHERE s.gender = 'female' GROUP BY s.editor
