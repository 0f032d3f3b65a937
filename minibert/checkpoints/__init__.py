"""Checkpoint formats, apart from the model (which knows none of them).

  families.py       the model families, one entry each (classes, checkpoint
                    names, tokenizer kind, how it deepens), which generic
                    code asks instead of testing a model's family
  pretrained.py     load_pretrained / save_pretrained: find the folder, detect
                    its format, build the model and fill it, with a strict
                    report; write Hugging Face's layout
  name_maps.py      our tensor names <-> Hugging Face's <-> Google TF's, one
                    printable table per family (BERT and ALBERT, DeBERTa) and
                    one for the task heads fine-tuning adds (transformers'
                    For<Task> names and architectures)
  task_folders.py   a fine-tuned folder's head, read (load_task_head); a task
                    folder trained with transformers (no task.json), read with
                    a task name and a label map
  tf_bundle.py      TensorFlow's TensorBundle (index + data), read without TensorFlow
  safetensors.py    the safetensors format, read and written without the package
"""

from minibert.checkpoints.pretrained import (build_and_fill, huggingface_config, huggingface_state_dict,
                                             load_pretrained, load_with_tokenizer, read_config, save_pretrained)

__all__ = ["build_and_fill", "huggingface_config", "huggingface_state_dict", "load_pretrained", "load_with_tokenizer",
           "read_config", "save_pretrained"]
