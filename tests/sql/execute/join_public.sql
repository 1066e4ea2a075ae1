SELECT e.family, COUNT(*) AS n FROM students AS s JOIN editors_public AS e ON s.editor = e.editor GROUP BY e.family
