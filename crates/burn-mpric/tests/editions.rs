//! Both editions' audits measure at the same policy: `measurement_settings` (this edition)
//! and `burn_mpric_022::audit::measured_policy` give the hand-checked policy for each audited
//! one, on a device with bf16 and on one without; and both audits of the same model report
//! it as `measured_at`.

use burn_mpric::audit::{AuditConfig, measurement_settings};
use burn_mpric::{FloatDType, MpSettings, Policy, ResolvedPolicy};

/// (audited, measured where the device runs bf16, measured where it does not), by hand:
/// every f16 slot at bf16 (f32 without bf16), the compute slot at bf16 (the measured param
/// dtype without bf16).
#[rustfmt::skip]
const CASES: [(&str, &str, &str); 5] = [
    ("p=f16,c=f16,o=f16", "p=bf16,c=bf16,o=bf16", "p=f32,c=f32,o=f32"),
    ("p=f32,c=f16,o=f32", "p=f32,c=bf16,o=f32", "p=f32,c=f32,o=f32"),
    ("p=f32,c=f16,o=f16", "p=f32,c=bf16,o=bf16", "p=f32,c=f32,o=f32"),
    ("p=f32,c=bf16,o=f32", "p=f32,c=bf16,o=f32", "p=f32,c=f32,o=f32"),
    ("p=f32,c=f32,o=f32", "p=f32,c=bf16,o=f32", "p=f32,c=f32,o=f32"),
];

#[test]
fn both_editions_measure_at_the_same_policy() {
    let with_bf16 = [FloatDType::F32, FloatDType::F16, FloatDType::BF16];
    let without = [FloatDType::F32, FloatDType::F16];
    for (audited, expected_bf16, expected_without) in CASES {
        let settings = MpSettings::new(audited.parse::<Policy>().unwrap());
        let resolved: ResolvedPolicy = audited.parse().unwrap();
        let old = |bf16| measurement_settings(&settings, bf16).policy().to_string();
        let new = |supported: &[FloatDType]| {
            burn_mpric_022::audit::measured_policy(resolved, supported).to_string()
        };
        assert_eq!(old(true), expected_bf16, "0.21, {audited} with bf16");
        assert_eq!(new(&with_bf16), expected_bf16, "0.22, {audited} with bf16");
        assert_eq!(old(false), expected_without, "0.21, {audited} without bf16");
        assert_eq!(
            new(&without),
            expected_without,
            "0.22, {audited} without bf16"
        );
    }
}

/// The Burn 0.21 audit of a 4-to-2 linear layer at `audited`: the policy it reports.
fn measured_at_021(audited: &str) -> String {
    use burn::backend::{Autodiff, Flex};
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::SgdConfig;
    use burn::tensor::Tensor;
    use burn_mpric::MixedPrecision;
    use burn_mpric::audit::audit;
    use burn_mpric::instrument::Instrumented;

    type B = Autodiff<MixedPrecision<Instrumented<Flex>>>;
    let audited = MpSettings::new(audited.parse::<Policy>().unwrap());
    let device = MixedPrecision::<Instrumented<Flex>>::device(
        Default::default(),
        measurement_settings(&audited, true),
    )
    .unwrap();
    let model: Linear<B> = LinearConfig::new(4, 2).init(&device);
    let x = Tensor::<B, 2>::ones([8, 4], &device);
    let config = AuditConfig::new(2);
    let report = audit(model, SgdConfig::new().init(), &audited, config, |m, _| {
        m.forward(x.clone()).powi_scalar(2).mean()
    })
    .unwrap();
    report.measured_at
}

/// The Burn 0.22 audit of a 4-to-2 linear layer at `audited`: the policy it reports.
fn measured_at_022(audited: &str) -> String {
    use burn_mpric_022::audit::{AuditConfig, audit};
    use burn_mpric_022::{cast_for_compute, cast_for_output};
    use burn022::nn::{Linear, LinearConfig};
    use burn022::optim::SgdConfig;
    use burn022::tensor::{Device, Tensor};

    let device = Device::flex().autodiff();
    let model: Linear = LinearConfig::new(4, 2).init(&device);
    let x = Tensor::<2>::ones([8, 4], &device);
    let found = audit(
        model,
        || SgdConfig::new().init(),
        audited.parse().unwrap(),
        AuditConfig::new(2),
        |m: &Linear, policy, _| {
            let y = m.forward(cast_for_compute(x.clone(), policy));
            cast_for_output(y, policy).powi_scalar(2).mean()
        },
    )
    .unwrap();
    found.report.measured_at
}

#[test]
fn both_audits_of_one_model_report_the_same_measured_policy() {
    // Flex runs bf16: the with-bf16 column.
    for (audited, expected, _) in &CASES[..2] {
        assert_eq!(measured_at_021(audited), *expected, "0.21, {audited}");
        assert_eq!(measured_at_022(audited), *expected, "0.22, {audited}");
    }
}
