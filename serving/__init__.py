"""The prediction service: FastAPI + ONNX Runtime, serving the model the registry marks production."""
