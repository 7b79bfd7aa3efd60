//! maslens-prior: a learned failure localizer that needs no LLM.
