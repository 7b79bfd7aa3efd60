//! maslens-implicit: implicit failures (MASIF): detection, absorption, risk, selection, repair, IF-GRPO.
