"""LocalStack init hook: create the tables config/local.toml writes to.

Runs inside LocalStack once it is ready (files in etc/localstack/init/ready.d).
"""
import boto3

ddb = boto3.client(
    "dynamodb",
    endpoint_url="http://127.0.0.1:4566",
    region_name="us-east-1",
    aws_access_key_id="test",
    aws_secret_access_key="test",
)
existing = set(ddb.list_tables()["TableNames"])
if "orders" not in existing:
    ddb.create_table(
        TableName="orders",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        ProvisionedThroughput={"ReadCapacityUnits": 100, "WriteCapacityUnits": 1000},
    )
