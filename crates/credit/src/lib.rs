//! maslens-credit: debate runtime, LLM critics, structural/temporal credit, verbalized block coordinate descent.
