//! One base for [`ChatModel`] wrappers (cache, budget, usage tracking, test fixtures): a wrapper
//! implements [`ModelWrapper`], names its inner model and writes only the methods it changes;
//! every other method forwards to the inner model. A blanket impl makes it a [`ChatModel`].
//!
//! Implement it by path (`impl maslens_llm::wrap::ModelWrapper for X`) rather than importing the
//! trait: with both traits in scope, `x.complete(..)` on the wrapper type would be ambiguous.

use crate::{ChatModel, ChatRequest, ChatResponse, LlmError};

/// A [`ChatModel`] that wraps another and forwards what it does not override.
#[async_trait::async_trait]
pub trait ModelWrapper: Send + Sync {
    /// The wrapped model.
    fn inner(&self) -> &dyn ChatModel;
    /// See [`ChatModel::id`]; forwarded by default.
    fn id(&self) -> &str {
        self.inner().id()
    }
    /// See [`ChatModel::context_size`]; forwarded by default.
    fn context_size(&self) -> Option<usize> {
        self.inner().context_size()
    }
    /// See [`ChatModel::count_tokens`]; forwarded by default.
    fn count_tokens(&self, text: &str) -> usize {
        self.inner().count_tokens(text)
    }
    /// See [`ChatModel::complete`]; forwarded by default.
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.inner().complete(request).await
    }
}

#[async_trait::async_trait]
impl<W: ModelWrapper> ChatModel for W {
    fn id(&self) -> &str {
        ModelWrapper::id(self)
    }
    fn context_size(&self) -> Option<usize> {
        ModelWrapper::context_size(self)
    }
    fn count_tokens(&self, text: &str) -> usize {
        ModelWrapper::count_tokens(self, text)
    }
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        ModelWrapper::complete(self, request).await
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::ScriptedModel;
    use crate::{ChatModel, ChatRequest, Message};

    struct Window(ScriptedModel);

    impl super::ModelWrapper for Window {
        fn inner(&self) -> &dyn ChatModel {
            &self.0
        }
        fn context_size(&self) -> Option<usize> {
            Some(42)
        }
    }

    #[tokio::test]
    async fn forwards_what_it_does_not_override() {
        let w = Window(ScriptedModel::new("fixture").then("hi"));
        let m: &dyn ChatModel = &w;
        assert_eq!((m.id(), m.context_size()), ("fixture", Some(42)));
        assert_eq!(m.count_tokens("abcdefgh"), 2);
        let r = m
            .complete(&ChatRequest::new(vec![Message::user("q")]))
            .await
            .unwrap();
        assert_eq!(r.text, "hi");
        assert_eq!(w.0.n_calls(), 1);
    }
}
