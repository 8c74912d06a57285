"""Operator sampling and fitted hardware profiles (`llmperf profile`), used by stage [4].

Predict path (numpy only): features.py (dims -> features + roofline), tree_eval.py (LightGBM text / sklearn
JSON evaluator), profile_io.py (profile.json + model files, integrity checks), predictor.py (FittedProfile),
comm_model.py (CommPredictor). Fitting and sampling (lightgbm / torch imported inside functions): fit.py,
build_profile.py, plan.py, op_sampler.py, sampler.py, local_hardware.py, comm_fit.py, comm_sampler.py;
public_samples.py and shipped.py describe the public samples the shipped profiles are fitted from.
"""
