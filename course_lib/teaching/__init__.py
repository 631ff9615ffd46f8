"""What only the book needs: plots (:mod:`~course_lib.teaching.plotting`), diagrams
(:mod:`~course_lib.teaching.diagrams`) and the exercises' checkers (:mod:`~course_lib.teaching.exercises`,
called as ``from course_lib.exercises import check``). Nothing outside this package imports it, so
``import course_lib`` does not import matplotlib."""
