"""What every layer knows about the model: its description, tokenizer, template and outputs.

`ModelInfo` describes the served model (name, context length, tokenizer, chat
template, vocabulary size, sampling defaults); `FinishReason` and `TokenLogprob`
name what generation produces. Engines build these (`model_dir.py` reads a Hugging
Face model directory), and the chat logic and the pipeline read them, so neither
side has to import the other. Nothing here does I/O after startup.
"""
