//! maslens-locate: failure localization (AgentLocate: Judge, Evaluators, confidence-weighted vote) and baselines.
