//! Probing servers (vLLM, SGLang, TGI, llama.cpp, Ollama): model, limits, KV capacity, metrics.
