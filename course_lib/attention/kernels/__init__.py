"""Every attention kernel, one module each, all behind :mod:`course_lib.attention.contract`.

``explicit`` and ``fused`` (chapters 3 and 5), ``flash`` (chapter 10's tiles and the online softmax),
``linear`` (chapter 10's linear attention), ``sliding_window`` (chapter 10), and the wrappers that add
positions to any of them: ``rotary`` (RoPE) and ``alibi`` (chapter 11). They are chosen by name through
:mod:`course_lib.attention.registry`.
"""
