"""The otter-grader plugin of the course's autograders: grading runs what the answers need, not the training.

``make assignments`` names this plugin in each autograder's configuration (``otter_config.json``), with
the names of the answers its tests take; ``otter run`` (``make grade``) and Gradescope load it from the
installed course_lib before they execute a submission. It marks every code cell the graded answers do not
need as one otter skips (:mod:`course_lib.assignments._needed` has the rule), so a chapter's trainings
(about 80 s in chapter 8, 100 s in 10, 180 s in 11 on a laptop CPU) are not re-run to grade it, and
section 8.1 grades without its data file.
"""

from __future__ import annotations

import nbformat
from otter.plugins import AbstractOtterPlugin

from ._needed import mark_cells_to_skip


class GradeWhatAnswersNeed(AbstractOtterPlugin):
    """``before_execution``: skip the cells the answers (``plugin_config["answers"]``) do not need."""

    def before_execution(self, submission: nbformat.NotebookNode | str) -> nbformat.NotebookNode | str:
        if isinstance(submission, str):  # a .py submission: nothing to skip
            return submission
        mark_cells_to_skip(submission, set(self.plugin_config.get("answers", [])))
        return submission
