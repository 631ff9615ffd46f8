"""Data for the seq2seq chapters: vocabularies, padded batches, the dates task and English -> French pairs;
and the token streams of the language models of chapters 11 (:mod:`.lm`) and 12 (:mod:`.python_source`, the
standard library's own source code).

Nothing here downloads anything unless asked: the dates task is generated with Babel, and the
translation pairs are read from the course's data folder (:func:`data_dir`), or fetched by the opt-in
``load_fra_eng(download=True)``.
"""

from .batching import Batch, encode_sources, make_batch, pad_sequences
from .dataset import SPLITS, Seq2SeqData, build_references, split_by_source
from .dates import (
    DATE_FORMATS,
    DATE_LOCALES,
    DEFAULT_YEARS,
    ambiguous_date_strings,
    date_formats,
    date_target,
    format_date_example,
    load_dates,
)
from .download import download_fra_eng
from .lm import LMBatch, LMData, english_sentences, generated_sentences, load_english_lm, read_text_lines
from .paths import DATA_DIR_ENV, DataNotFoundError, data_dir, find_data_file
from .python_source import PYTHON_SOURCE_LICENSE, load_python_lm, python_source_files
from .subword import SubwordTokenizer, bpe_merge_step, clean_text, load_fra_eng_subwords
from .translation import FRA_ENG_FILE, fra_eng_file, load_fra_eng, normalize_text, read_sentence_pairs, tokenize_words
from .vocab import SPECIAL_TOKENS, Vocab

__all__ = [
    "DATA_DIR_ENV",
    "DATE_FORMATS",
    "DATE_LOCALES",
    "DEFAULT_YEARS",
    "FRA_ENG_FILE",
    "PYTHON_SOURCE_LICENSE",
    "SPECIAL_TOKENS",
    "SPLITS",
    "SubwordTokenizer",
    "Batch",
    "DataNotFoundError",
    "LMBatch",
    "LMData",
    "Seq2SeqData",
    "Vocab",
    "ambiguous_date_strings",
    "bpe_merge_step",
    "build_references",
    "clean_text",
    "data_dir",
    "download_fra_eng",
    "english_sentences",
    "date_formats",
    "date_target",
    "encode_sources",
    "find_data_file",
    "format_date_example",
    "fra_eng_file",
    "generated_sentences",
    "load_dates",
    "load_english_lm",
    "load_fra_eng",
    "load_fra_eng_subwords",
    "load_python_lm",
    "make_batch",
    "normalize_text",
    "pad_sequences",
    "python_source_files",
    "read_sentence_pairs",
    "read_text_lines",
    "split_by_source",
    "tokenize_words",
]
