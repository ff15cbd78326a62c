"""Per-operator models: configuration -> throughput and memory per replica, with uncertainty."""
from trident.core.model.features import ConfigFeatures, FeatureEncoder, device_type_of
from trident.core.model.gp import FitReport, MemoryPrediction, OperatorModel, Prediction
from trident.core.model.regimes import RegimeMatch, RegimeStore

__all__ = [
    "ConfigFeatures",
    "FeatureEncoder",
    "FitReport",
    "MemoryPrediction",
    "OperatorModel",
    "Prediction",
    "RegimeMatch",
    "RegimeStore",
    "device_type_of",
]
