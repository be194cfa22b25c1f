//! A model's loss and accuracy over a dataset's held-out split: the rows a training run
//! records at its checkpoints, and what `mpric evaluate` reports.

use burn::tensor::ElementConversion;
use burn::tensor::backend::Backend;

use crate::data::Dataset;
use crate::error::Error;
use crate::models::Model;
use crate::report::metrics::EvalRow;

/// Mean loss and accuracy of `model` over the held-out split (`step` is left at 0 for the
/// caller to set).
pub(crate) fn evaluate<B: Backend>(
    model: &Model<B>,
    data: &Dataset,
    batch_size: usize,
    device: &B::Device,
) -> Result<EvalRow, Error> {
    let mut loss_sum = 0.0f64;
    let mut correct = 0i64;
    let mut predictions = 0usize;
    let mut finite = true;
    // Evaluation holds no graph, so larger batches are cheap.
    for items in data.eval_batches(batch_size.max(256)) {
        let batch = data.batch::<B>(true, &items, device);
        let n = batch.len;
        let out = model.forward(batch)?;
        let loss: f32 = out.loss.into_scalar().elem();
        finite &= loss.is_finite();
        loss_sum += f64::from(loss) * n as f64;
        if let Some(c) = out.correct {
            correct += c.into_scalar().elem::<i64>();
        }
        predictions += n;
    }
    Ok(EvalRow {
        step: 0,
        loss: (finite && predictions > 0).then(|| (loss_sum / predictions as f64) as f32),
        accuracy: (data.has_accuracy() && predictions > 0)
            .then(|| correct as f32 / predictions as f32),
        predictions,
    })
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;

    use crate::Recipe;
    use crate::data::Dataset;
    use crate::models::Model;

    #[test]
    fn an_untrained_model_is_evaluated_on_the_held_out_split() -> Result<(), crate::Error> {
        let recipe = Recipe::example();
        let data =
            Dataset::load(&recipe.dataset, &recipe.model, 0, std::path::Path::new("")).unwrap();
        let device = Default::default();
        let model = Model::<Flex>::init_seeded(&recipe.model, data.dims(), 0, &device);
        let eval = super::evaluate(&model, &data, 16, &device)?;
        assert_eq!(eval.predictions, 30);
        assert!(eval.loss.unwrap() > 0.5); // untrained: about ln 3
        Ok(())
    }
}
